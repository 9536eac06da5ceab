// Command kelpie is the cluster console for parameter-server training jobs.
// Everything lives in package cli; this file only hands over.
package main

import (
	"os"

	"github.com/kelpie/kelpie/cmd/kelpie/cli"
)

func main() { os.Exit(cli.Run(os.Args[1:])) }
