from poot.cli import main

raise SystemExit(main())
