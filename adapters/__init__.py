"""Everything that speaks a protocol: Slack, GitHub, the web app, the CLI and the emulators."""
