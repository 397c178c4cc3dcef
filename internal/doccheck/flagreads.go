package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// UndeclaredReads inspects the Go package in dir and returns one message for
// every flag a command's action reads (flag.Get(c) or c.IsSet(flag.Name),
// in the action or any function of the package it calls) that is not in
// that command's Flags. urfave/cli answers such a read with the zero value,
// silently: this is how --compile-cost once went unreachable.
func UndeclaredReads(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	p := &pkgIndex{funcs: map[string]*ast.FuncDecl{}, vars: map[string]ast.Expr{}}
	var commands []*ast.ValueSpec
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if name, ok := literalLookup(n); ok {
				out = append(out, fmt.Sprintf("%s: flag %s read by its name; read it through its flag variable", fset.Position(n.Pos()), name))
			}
			return true
		})
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok {
						continue
					}
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							p.vars[n.Name] = vs.Values[i]
							if isCommandLit(vs.Values[i]) {
								commands = append(commands, vs)
							}
						}
					}
				}
			}
		}
	}
	for _, vs := range commands {
		lit := vs.Values[0].(*ast.UnaryExpr).X.(*ast.CompositeLit)
		declared, reads := map[string]bool{}, map[string]bool{}
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch kv.Key.(*ast.Ident).Name {
			case "Flags":
				p.flagIdents(kv.Value, declared, map[string]bool{})
			case "Action":
				p.readsIn(kv.Value, reads, map[string]bool{})
			}
		}
		for _, r := range slices.Sorted(maps.Keys(reads)) {
			if !declared[r] {
				out = append(out, fmt.Sprintf("%s: the action reads %s, which is not in its Flags", vs.Names[0].Name, r))
			}
		}
	}
	return out, nil
}

type pkgIndex struct {
	funcs map[string]*ast.FuncDecl
	vars  map[string]ast.Expr
}

// litType is the type name of &pkg.T{...} ("Command", "StringFlag"), or "".
func litType(e ast.Expr) string {
	u, ok := e.(*ast.UnaryExpr)
	if !ok {
		return ""
	}
	cl, ok := u.X.(*ast.CompositeLit)
	if !ok {
		return ""
	}
	if sel, ok := cl.Type.(*ast.SelectorExpr); ok {
		return sel.Sel.Name
	}
	return ""
}

func isCommandLit(e ast.Expr) bool { return litType(e) == "Command" }

// isFlagLit reports a flag: &cli.XxxFlag{...}, or a call of a shared flag
// constructor such as cliutil.DeviceFlag().
func isFlagLit(e ast.Expr) bool {
	if call, ok := e.(*ast.CallExpr); ok && len(call.Args) == 0 {
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			return strings.HasSuffix(sel.Sel.Name, "Flag")
		}
	}
	return strings.HasSuffix(litType(e), "Flag")
}

// flagIdents collects the flag variables an expression for a []cli.Flag
// names, following package variables, append and local functions.
func (p *pkgIndex) flagIdents(e ast.Node, into, seen map[string]bool) {
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if seen[n.Name] {
				return false
			}
			seen[n.Name] = true
			if v, ok := p.vars[n.Name]; ok {
				if isFlagLit(v) {
					into[n.Name] = true
				} else {
					p.flagIdents(v, into, seen)
				}
			}
			if fd, ok := p.funcs[n.Name]; ok && fd.Body != nil {
				p.flagIdents(fd.Body, into, seen)
			}
		}
		return true
	})
}

// readsIn collects flag variables read in n and in the local functions it
// calls: X.Get(...) and c.IsSet(X.Name).
func (p *pkgIndex) readsIn(n ast.Node, into, seen map[string]bool) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr: // flag.Get(c)
			if id, ok := n.X.(*ast.Ident); ok && n.Sel.Name == "Get" {
				if v, ok := p.vars[id.Name]; ok && isFlagLit(v) {
					into[id.Name] = true
				}
			}
		case *ast.CallExpr: // c.IsSet(flag.Name)
			if fun, ok := n.Fun.(*ast.SelectorExpr); ok && fun.Sel.Name == "IsSet" && len(n.Args) == 1 {
				if arg, ok := n.Args[0].(*ast.SelectorExpr); ok && arg.Sel.Name == "Name" {
					if id, ok := arg.X.(*ast.Ident); ok {
						if v, ok := p.vars[id.Name]; ok && isFlagLit(v) {
							into[id.Name] = true
						}
					}
				}
			}
		case *ast.Ident:
			if fd, ok := p.funcs[n.Name]; ok && !seen[n.Name] && fd.Body != nil {
				seen[n.Name] = true
				p.readsIn(fd.Body, into, seen)
			}
		}
		return true
	})
}

// literalLookup matches c.String("name") and its kin: a context accessor
// called with a string literal.
func literalLookup(n ast.Node) (string, bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	switch sel.Sel.Name {
	case "String", "Int", "Int64", "Uint", "Uint64", "Bool", "Float64", "Duration",
		"StringSlice", "IntSlice", "Generic", "Value", "IsSet", "Path", "Timestamp":
		return lit.Value, true
	}
	return "", false
}
