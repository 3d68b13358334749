import sys

from agentpost.cli import main

sys.exit(main())
