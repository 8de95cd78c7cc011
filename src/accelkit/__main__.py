from accelkit.cli import main

main()
