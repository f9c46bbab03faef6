// Package proctortestmain runs a Go job's tests from the generated main and proves they ran
// to their end (proctorguard.Finish) only when every one of them returned without failing.
//
// Compiled once in the image (images/go/Dockerfile), so a job compiles and links only a
// three-line main. It passes testing.MainStart its own dependencies instead of
// testing/internal/testdeps, whose fuzzing and profiling machinery a job never uses
// (os.Args is reset, so no -test.* flag reaches the tests) and which the linker would load
// on every job. The server refuses programs that reference this package, as it does the guard.
package proctortestmain

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"testing"
	"time"

	guard "proctorguard"
)

// Test is one func TestXxx(t *testing.T) of the job, by name.
type Test struct {
	Name string
	F    func(*testing.T)
}

// Run runs the tests as `go test` would, with no flags, and exits: 0 only when every test
// ran to its end without failing or skipping (then the nonce goes back on fd 3).
func Run(tests []Test) {
	// Nothing the program set before main (flags, -test.run in os.Args) reaches the run.
	os.Args = os.Args[:1]
	completed := make([]bool, len(tests))
	internal := make([]testing.InternalTest, len(tests))
	for i, test := range tests {
		i, f := i, test.F
		internal[i] = testing.InternalTest{Name: test.Name, F: func(t *testing.T) {
			f(t)
			if !t.Failed() && !t.Skipped() {
				completed[i] = true
			}
		}}
	}
	code := testing.MainStart(deps{}, internal, nil, nil, nil).Run()
	for i, done := range completed {
		if !done {
			fmt.Fprintf(os.Stderr, "[proctor] test %s did not run to its end\n", tests[i].Name)
			code = 1
		}
	}
	if code == 0 {
		guard.Finish()
	}
	os.Exit(code)
}

// corpusEntry is testing's (an alias of an unnamed struct there, so this one is identical).
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

var errUnavailable = errors.New("not available in the sandbox")

// deps is what testing.MainStart asks of its caller: test name matching; no profiles,
// test log, coverage or fuzzing (a job passes no flags and has no fuzz targets).
type deps struct{}

func (deps) MatchString(pat, str string) (bool, error)                { return regexp.MatchString(pat, str) }
func (deps) SetPanicOnExit0(bool)                                     {}
func (deps) StartCPUProfile(io.Writer) error                          { return errUnavailable }
func (deps) StopCPUProfile()                                          {}
func (deps) StartTestLog(io.Writer)                                   {}
func (deps) StopTestLog() error                                       { return nil }
func (deps) WriteProfileTo(string, io.Writer, int) error              { return errUnavailable }
func (deps) ImportPath() string                                       { return "" }
func (deps) ResetCoverage()                                           {}
func (deps) SnapshotCoverage()                                        {}
func (deps) CheckCorpus([]any, []reflect.Type) error                  { return nil }
func (deps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) { return nil, nil }
func (deps) RunFuzzWorker(func(corpusEntry) error) error              { return errUnavailable }
func (deps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry,
	[]reflect.Type, string, string) error {
	return errUnavailable
}
