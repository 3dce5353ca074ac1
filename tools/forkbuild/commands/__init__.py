"""One module per subcommand. Each defines add_parser(subparsers), which sets
`run=<function(args, context) -> int | None>` as the parser's default."""
