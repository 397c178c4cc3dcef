// Package ov is a thin Go binding to OpenVINO's C API.
//
// It is the only package in the module that uses cgo. libopenvino_c is not
// linked at build time: Load finds and opens it at run time (see Load for the
// search order), so a missing library is a Go error rather than a loader
// crash. The package compiles against the headers of the pinned wheel in
// .venv, and Load refuses a library of another release, since the C enums
// (element types in particular) change between releases.
//
// Every C resource is released by an explicit Close (or Free); there are no
// finalizers. Close on nil or on an already closed value is a no-op.
package ov

/*
#cgo CFLAGS: -I${SRCDIR}/../.venv/openvino/include
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// The release the headers in .venv/openvino/include describe
// (OPENVINO_VERSION_MAJOR/MINOR in openvino/core/version.hpp; a test checks
// they agree) and the matching soversion of libopenvino_c.
const (
	headerVersion = "2026.3"
	soVersion     = "2630"
	libPrefix     = "libopenvino_c.so."
	libName       = libPrefix + soVersion
)

// EnvLibrary names the environment variable that, when set, is the only
// place Load looks: a libopenvino_c.so.* file or a folder holding one.
const EnvLibrary = "OVRUN_OPENVINO_LIB"

// ErrLibraryNotFound is returned (wrapped) by Load and by everything that
// needs the library when no libopenvino_c could be found.
var ErrLibraryNotFound = errors.New("openvino C library not found")

// ErrLibraryUnusable is returned (wrapped) by Load when a libopenvino_c was
// found but could not be used: it failed to open, lacks a symbol, or is of
// another release than the headers this package was built against.
var ErrLibraryUnusable = errors.New("openvino C library unusable")

const loadHint = `set ` + EnvLibrary + ` to ` + libName +
	` or its folder, or run "make setup" to install the pinned openvino wheel into .venv`

var (
	loadOnce sync.Once
	loadErr  error
	loadPath string
)

// Load finds and opens libopenvino_c once per process and returns the same
// result on every call; it is safe to call from many goroutines. Functions
// that need the library call it themselves.
//
// Search order, explicit places only (never the working directory or its
// parents, where anyone able to write a parent folder, /tmp say, could plant
// a library whose constructor would run):
//  1. $OVRUN_OPENVINO_LIB, a file or a folder; when set, nothing else is tried;
//  2. the project's .venv next to the executable: .venv/openvino/libs in
//     the executable's folder, then in its parent (bin/ovrun finds the
//     checkout's .venv);
//  3. $VIRTUAL_ENV/lib/python3*/site-packages/openvino/libs;
//  4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache) for
//     libopenvino_c.so.2630.
//
// In a folder, libopenvino_c.so.2630 (the soversion of the headers) is used.
// A library found in step 2 or 3 must belong to this user or root and sit in
// folders that others cannot write, or it is skipped with a note.
func Load() error {
	loadOnce.Do(func() { loadPath, loadErr = load() })
	return loadErr
}

// LibraryPath calls Load and reports the library it opened: a path, or the
// bare soname when the dynamic loader found it; "" if Load failed.
func LibraryPath() string {
	if Load() != nil {
		return ""
	}
	return loadPath
}

// load runs the search. Each candidate that does not pan out leaves a short
// note in tried; the first file that exists is opened or reported unusable.
func load() (string, error) {
	var tried []string
	if env := os.Getenv(EnvLibrary); env != "" {
		path, note := resolveCandidate(env)
		if path == "" {
			return "", notFound([]string{EnvLibrary + "=" + env + ": " + note})
		}
		return path, open(path)
	}

	var dirs, roots []string // roots[i]: the environment dirs[i] belongs to
	if exe, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		dir := filepath.Dir(exe)
		dirs = append(dirs, filepath.Join(dir, ".venv", "openvino", "libs"), filepath.Join(dir, "..", ".venv", "openvino", "libs"))
		roots = append(roots, filepath.Join(dir, ".venv"), filepath.Join(dir, "..", ".venv"))
	}
	venv := os.Getenv("VIRTUAL_ENV")
	if venv != "" {
		matches, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", "openvino", "libs"))
		sort.Strings(matches)
		for _, m := range matches {
			dirs, roots = append(dirs, m), append(roots, venv)
		}
	}
	for i, d := range dirs {
		path, note := findInDir(d)
		if path != "" {
			if why := untrusted(path, roots[i]); why != "" {
				tried = append(tried, path+": skipped, "+why)
				continue
			}
			return path, open(path)
		}
		if otherVersions(d) != "" {
			tried = append(tried, d+": "+note)
		}
	}

	tried = append(tried, ".venv/openvino/libs next to the executable")
	if venv == "" {
		tried = append(tried, "VIRTUAL_ENV (unset)")
	} else {
		tried = append(tried, "VIRTUAL_ENV="+venv)
	}
	err := open(libName)
	if err == nil {
		return libName, nil
	}
	if errors.Is(err, ErrLibraryUnusable) {
		return "", err
	}
	tried = append(tried, "loader search path ("+oneLine(err.Error())+")")
	return "", notFound(tried)
}

func notFound(tried []string) error {
	return fmt.Errorf("%w (tried %s); %s", ErrLibraryNotFound, strings.Join(tried, "; "), loadHint)
}

// resolveCandidate turns an explicit file or folder into a library path, or
// returns "" and why not.
func resolveCandidate(p string) (string, string) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", "no such file or folder"
		}
		return "", oneLine(err.Error())
	}
	if !fi.IsDir() {
		return p, ""
	}
	return findInDir(p)
}

// findInDir returns dir's libopenvino_c.so.<soversion>, or "" and why not.
func findInDir(dir string) (string, string) {
	p := filepath.Join(dir, libName)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, ""
	}
	if wrong := otherVersions(dir); wrong != "" {
		return "", "only " + wrong + " there, need " + libName
	}
	return "", "no " + libPrefix + "* there"
}

// otherVersions lists the libopenvino_c files of other releases in dir.
func otherVersions(dir string) string {
	matches, _ := filepath.Glob(filepath.Join(dir, libPrefix+"*"))
	var names []string
	for _, m := range matches {
		if b := filepath.Base(m); b != libName {
			names = append(names, b)
		}
	}
	return strings.Join(names, ", ")
}

// open dlopens path, resolves every symbol and checks the release.
func open(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	if rc := C.ovr_open(cpath, &cerr); rc != 0 {
		msg := "dlopen failed"
		if cerr != nil {
			msg = C.GoString(cerr)
			C.free(unsafe.Pointer(cerr))
		}
		if rc == 1 && path == libName {
			// Not found by the loader: the caller reports ErrLibraryNotFound.
			return errors.New(msg)
		}
		return fmt.Errorf("%w: %s; %s", ErrLibraryUnusable, oneLine(msg), loadHint)
	}
	v, err := version()
	if err != nil {
		return fmt.Errorf("%w: %s: %s", ErrLibraryUnusable, path, oneLine(err.Error()))
	}
	if !strings.HasPrefix(v, headerVersion+".") {
		return fmt.Errorf("%w: %s is openvino %s but package ov was built against %s headers; %s",
			ErrLibraryUnusable, path, v, headerVersion, loadHint)
	}
	return nil
}

// untrusted says why a library found by the search (not named by the user)
// must not be loaded: it, or a folder from it up to root (its environment),
// belongs to another user or is writable by others. "" when it may be loaded.
func untrusted(path, root string) string {
	uid := os.Geteuid()
	root = filepath.Clean(root)
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return oneLine(err.Error())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
			return fmt.Sprintf("%s belongs to uid %d", p, st.Uid)
		}
		if fi.Mode().Perm()&0o002 != 0 && fi.Mode()&os.ModeSticky == 0 {
			return p + " is writable by everyone"
		}
		if p == root || filepath.Dir(p) == p {
			return ""
		}
	}
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
