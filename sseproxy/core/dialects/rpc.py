"""Which JSON-RPC protocol a request speaks, from its `method` (and MCP's version header).

MCP and A2A both send `"jsonrpc": "2.0"`, so the response shape alone cannot tell them apart:
the request's method does. MCP's methods are those of its specification (2025-06-18 and later:
`initialize`, `ping`, and the `tools/`, `resources/`, `prompts/`, `sampling/`,
`notifications/`, `completion/`, `logging/`, `roots/`, `elicitation/`, `subscriptions/`
families); any request carrying `MCP-Protocol-Version` is MCP too. A2A's are the 0.x names
(`message/stream`, `tasks/resubscribe`, ...) and v1.0's (`SendStreamingMessage`,
`SubscribeToTask`, ...), as the `a2a-sdk` dispatcher routes them. `tasks/get` and
`tasks/cancel` belong to both (MCP 2025-11-25 added tasks): without the MCP header they select
neither, and the response's shape decides.
"""

from __future__ import annotations

from sseproxy.core.dialects.spec import sse_event
from sseproxy.core.request import RequestFacts

MCP_METHODS = frozenset({"initialize", "ping"})
MCP_FAMILIES = (
    "tools/",
    "resources/",
    "prompts/",
    "sampling/",
    "notifications/",
    "completion/",
    "logging/",
    "roots/",
    "elicitation/",
    "subscriptions/",
)
# A2A 0.3 (`a2a.compat.v0_3.jsonrpc_adapter`) and v1.0 (`a2a.server.routes.jsonrpc_dispatcher`).
A2A_STREAMING = frozenset(
    {"message/stream", "tasks/resubscribe", "SendStreamingMessage", "SubscribeToTask"}
)
A2A_METHODS = A2A_STREAMING | {
    "message/send",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
    "SendMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
}


def is_mcp(asked: RequestFacts) -> bool:
    """An MCP request: an MCP method, or the `MCP-Protocol-Version` header."""
    method = asked.rpc_method
    if asked.mcp_version is not None:
        return True
    return method is not None and (method in MCP_METHODS or method.startswith(MCP_FAMILIES))


def is_a2a(asked: RequestFacts) -> bool:
    """An A2A request by its method (and not one that says it is MCP)."""
    return asked.rpc_method in A2A_METHODS and asked.mcp_version is None


def injected_rpc_error(sequence_number: int) -> bytes:
    """A drill's in-band error for a JSON-RPC stream (MCP, A2A): JSON-RPC's internal error."""
    error = {"code": -32603, "message": "Internal error (injected)"}
    return sse_event({"jsonrpc": "2.0", "id": None, "error": error})
