"""One module per subcommand of `libmemleak` (cli.py registers them): each
parses its options, calls the library and maps errors to exit statuses
(docs/cli.md)."""
