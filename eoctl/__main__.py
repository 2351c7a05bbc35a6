from eoctl.cli.main import console

console()
