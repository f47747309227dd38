"""``python -m spanjudge.cli``: the same as the ``spanjudge`` command."""

from spanjudge.cli.app import main

if __name__ == "__main__":
    main()
