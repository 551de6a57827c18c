import sys

from tidemark_cli.main import main

sys.exit(main())
