from vitlit.cli import main

main()
