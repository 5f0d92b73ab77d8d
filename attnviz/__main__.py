from attnviz.cli import main

main()
