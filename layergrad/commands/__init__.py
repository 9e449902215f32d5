"""One function per command (inspect, scan, check, diff, ...): what the CLI and the API call.

May import every stage below; never render or cli, never prints."""
