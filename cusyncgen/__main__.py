"""`python -m cusyncgen ...` runs the cusyncgen command line."""
import sys

from cusyncgen.cli import main

sys.exit(main())
