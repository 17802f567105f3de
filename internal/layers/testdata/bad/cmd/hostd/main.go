package main

import _ "github.com/spf13/cobra"
