package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// scan walks the module under root and returns, by package directory
// (relative to root), the sorted names of the top-level tests that call
// citest.Long. It fails on a file that does not parse, on any test that
// skips under -short without Long (a bare `if testing.Short()` whose body
// calls a Skip method) and on a call of Long outside a Test function,
// naming each.
func scan(root string) (map[string][]string, error) {
	pkgs := map[string][]string{}
	var bare, misplaced []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !callsLong(fn.Body) {
				continue
			}
			if fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				misplaced = append(misplaced, fset.Position(fn.Pos()).String())
				continue
			}
			pkgs[dir] = append(pkgs[dir], fn.Name.Name)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ifs, ok := n.(*ast.IfStmt); ok && isShortCall(ifs.Cond) && callsSkip(ifs.Body) {
				bare = append(bare, fset.Position(ifs.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(bare) > 0 {
		return nil, errors.New("a test skips under -short without citest.Long, so neither `make test` nor CI would run it; call citest.Long(t, reason) instead: " + strings.Join(bare, ", "))
	}
	if len(misplaced) > 0 {
		return nil, errors.New("citest.Long is called outside a test function, so the test that skips is not listed; call it in the test itself: " + strings.Join(misplaced, ", "))
	}
	for dir := range pkgs {
		sort.Strings(pkgs[dir])
	}
	return pkgs, nil
}

// callsLong reports whether body calls citest.Long.
func callsLong(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && isSelector(call.Fun, "citest", "Long") {
			found = true
		}
		return !found
	})
	return found
}

// isShortCall reports whether e is testing.Short().
func isShortCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	return ok && len(call.Args) == 0 && isSelector(call.Fun, "testing", "Short")
}

// callsSkip reports whether body calls a method named Skip, Skipf or
// SkipNow (t.Skip and the like).
func callsSkip(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
					found = true
				}
			}
		}
		return !found
	})
	return found
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
