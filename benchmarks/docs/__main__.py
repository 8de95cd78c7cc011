import sys

from benchmarks.docs.engine import main

sys.exit(main())
