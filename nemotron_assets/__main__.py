import sys

from nemotron_assets.cli import main

sys.exit(main())
