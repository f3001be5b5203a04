//! Library side of the `knot` command: model conversion and the subcommands' logic.
