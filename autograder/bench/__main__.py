import sys

from .run import main

sys.argv[0] = "python -m autograder.bench"  # what --help calls it
sys.exit(main())
