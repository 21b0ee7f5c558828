import sys

from .inductor_tests import main

if __name__ == "__main__":
    sys.exit(main())
