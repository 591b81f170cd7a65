"""The aiohttp shell around the sans-I/O core, in the shape of DESIGN.md's "next shape":

admission (read and bound the request, route, loop check) -> upstream (pooled, isolated) ->
one relay loop (chunk -> [injector] -> write -> tap.feed) -> one frozen record -> guarded sinks.
"""
