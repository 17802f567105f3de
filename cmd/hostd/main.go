// Command hostd is the hostd daemon and its command-line client.
//
// See README.md and docs/ for usage; `hostd --help` lists the commands.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
