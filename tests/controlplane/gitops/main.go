// gitops-health reads a Kubernetes object as JSON on stdin and prints, on one line, what
// kstatus says of it and what an Argo CD health script (the file named by the one argument)
// says: `kstatus=<Status> argocd=<Healthy|Progressing|Degraded|...> message=<Argo's message>`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
)

func main() {
	if len(os.Args) != 2 {
		fail("usage: gitops-health <health.lua> < object.json")
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err.Error())
	}
	// Integers as int64, as the API machinery decodes them (kstatus reads generations so).
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		fail("not a JSON object: " + err.Error())
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		fail("kstatus: " + err.Error())
	}
	health, message := argo(os.Args[1], obj)
	fmt.Printf("kstatus=%s argocd=%s message=%s\n", res.Status, health, message)
}

// argo runs the health script as Argo CD does: the object as the global `obj`, only the base,
// table, string and math libraries open, and the returned table's `status` and `message`.
func argo(script string, obj map[string]any) (string, string) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoFile(script); err != nil {
		fail("health script: " + err.Error())
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		fail("health script returned no table")
	}
	return lua.LVAsString(hs.RawGetString("status")), lua.LVAsString(hs.RawGetString("message"))
}

// toLua converts decoded JSON into Lua values: objects and arrays become tables (arrays
// indexed from 1), as Argo CD's conversion does.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "gitops-health:", msg)
	os.Exit(2)
}
