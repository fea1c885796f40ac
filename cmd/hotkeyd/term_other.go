//go:build !(linux || darwin || freebsd)

package main

import (
	"errors"
	"os"
)

func rawTerminal(*os.File) (func(), error) { return nil, errors.New("no raw terminal here") }

func termSize(*os.File) (cols, rows int, ok bool) { return 0, 0, false }
