import sys

from identifiable_cl.cli import main

sys.exit(main())
