from spladekit.cli import main

main()
