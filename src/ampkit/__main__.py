"""``python -m ampkit`` runs the command line (what ``torchrun -m ampkit`` needs)."""

from ampkit.cli import main

if __name__ == "__main__":
    main()
