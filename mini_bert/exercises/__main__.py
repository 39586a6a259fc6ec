"""Command line for teachers: `python -m mini_bert.exercises grade FOLDER [--chapters 1,3] [--timeout 120] [--csv FILE]`.

Runs every student notebook of FOLDER (FOLDER/<student>/NN_name.ipynb) and prints a grade table;
see `mini_bert.exercises.grade` and the book's appendix "Teaching with this book".
"""
import sys

from .grade import main

sys.exit(main())
