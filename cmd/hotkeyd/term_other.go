//go:build !(linux || darwin || freebsd)

package main

import (
	"errors"
	"os"
)

func rawTerminal(*os.File) (func(), error) { return nil, errors.New("no raw terminal here") }
