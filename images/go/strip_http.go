// Prints a Go source file without its top-level functions and methods whose names start with
// HTTP, and without its imports of net/... packages: testify's assert with its HTTP assertions
// left out (images/go/Dockerfile). A job whose sources never say HTTP links against that copy:
// net/http is most of what the linker would otherwise load (~70 ms of a ~160 ms link).
package main

import (
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

func main() {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, os.Args[1], nil, parser.ParseComments)
	if err != nil {
		panic(err)
	}
	kept := file.Decls[:0]
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "HTTP") {
			continue
		}
		kept = append(kept, decl)
	}
	file.Decls = kept
	// The HTTP assertions were the only users of these packages; the compile fails if not.
	for _, decl := range file.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.IMPORT {
			specs := gen.Specs[:0]
			for _, spec := range gen.Specs {
				path := spec.(*ast.ImportSpec).Path.Value
				if !strings.HasPrefix(path, "\"net/") {
					specs = append(specs, spec)
				}
			}
			gen.Specs = specs
		}
	}
	file.Comments = nil
	if err := format.Node(os.Stdout, fset, file); err != nil {
		panic(err)
	}
}
