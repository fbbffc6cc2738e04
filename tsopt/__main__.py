from tsopt.cli import main

main()
