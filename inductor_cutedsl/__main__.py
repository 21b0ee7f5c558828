"""``python -m inductor_cutedsl``: the command line (``cli.main``)."""

from .cli.main import main

if __name__ == "__main__":
    main()
