import sys

from sseproxy.cli import main

sys.exit(main())
