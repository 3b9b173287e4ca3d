# `python -m ghostify`: the package imports nothing heavy, so ghostify.cli installs the signal
# handling before torch and transformers load
from .cli import run

run()
