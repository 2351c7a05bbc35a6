from eoctl.cli.main import main

main()
