import sys

from perflab.cli import main

if __name__ == "__main__":  # not when multiprocessing imports the main module in a child
    sys.exit(main())
