from ghostify.cli.app import run

run()
