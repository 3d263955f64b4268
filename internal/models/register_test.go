package models_test

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/internal/models"
)

// op builds one operation of a history; call and ret are its interval.
func op(client int, call, ret int64, in models.RegisterInput, out models.RegisterOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func put(token, write int64) models.RegisterInput {
	return models.RegisterInput{Kind: models.Put, Token: token, Write: write}
}

func write(kind models.Kind, token int64) models.RegisterInput {
	return models.RegisterInput{Kind: kind, Token: token}
}

var (
	get     = models.RegisterInput{Kind: models.Get}
	ok      = models.RegisterOutput{Outcome: models.OK}
	unknown = models.RegisterOutput{Outcome: models.Unknown}
)

func stale(f int64) models.RegisterOutput {
	return models.RegisterOutput{Outcome: models.Stale, Fence: f, FenceKnown: true}
}

func read(w, f int64) models.RegisterOutput {
	return models.RegisterOutput{Outcome: models.OK, Write: w, Fence: f, FenceKnown: true}
}

func missing(f int64) models.RegisterOutput {
	return models.RegisterOutput{Outcome: models.NotFound, Fence: f, FenceKnown: true}
}

func TestRegister(t *testing.T) {
	cases := []struct {
		name string
		init models.RegisterState
		hist []porcupine.Operation
		want bool
	}{
		{"sequential put, advance, stale put, get", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(0, 2, 3, write(models.Advance, 6), ok),
			op(0, 4, 5, put(5, 2), stale(6)),
			op(0, 6, 7, get, read(1, 6)),
		}, true},
		{"equal token accepted by every method", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(0, 2, 3, write(models.Advance, 5), ok),
			op(0, 4, 5, write(models.Delete, 5), ok),
			op(0, 6, 7, get, missing(5)),
		}, true},
		{"lower token accepted", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(7, 1), ok),
			op(0, 2, 3, put(5, 2), ok),
		}, false},
		{"stale with the wrong fence", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(7, 1), ok),
			op(0, 2, 3, put(5, 2), stale(5)),
		}, false},
		{"refused although allowed", models.RegisterState{Fence: 3}, []porcupine.Operation{
			op(0, 0, 1, put(3, 1), stale(3)),
		}, false},
		{"delete keeps the fence", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(0, 2, 3, write(models.Delete, 6), ok),
			op(0, 4, 5, get, missing(0)),
		}, false},
		{"advance writes nothing", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, write(models.Advance, 4), ok),
			op(0, 2, 3, get, read(1, 4)),
		}, false},
		{"a read shows which write it saw, not its bytes", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(0, 2, 3, put(5, 2), ok),
			op(0, 4, 5, get, read(1, 5)),
		}, false},
		{"concurrent writes in either order", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 10, put(5, 1), ok),
			op(1, 1, 9, put(6, 2), ok),
			op(2, 11, 12, get, read(2, 6)),
		}, true},
		{"an unknown write that took effect", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(1, 2, 100, put(6, 2), unknown),
			op(0, 3, 4, get, read(2, 6)),
		}, true},
		{"an unknown write that did not", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(1, 2, 100, put(6, 2), unknown),
			op(0, 3, 4, get, read(1, 5)),
		}, true},
		{"an unknown stale write cannot take effect", models.RegisterState{}, []porcupine.Operation{
			op(0, 0, 1, put(5, 1), ok),
			op(1, 2, 100, put(4, 2), unknown),
			op(0, 3, 4, get, read(2, 5)),
		}, false},
		{"starts from init", models.RegisterState{Write: 9, Fence: 9}, []porcupine.Operation{
			op(0, 0, 1, get, read(9, 9)),
			op(0, 2, 3, put(8, 1), stale(9)),
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(models.Register(c.init), c.hist); got != c.want {
				t.Fatalf("linearizable = %v; want %v", got, c.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{models.Get.String(), "get"}, {models.Put.String(), "put"}, {models.Delete.String(), "delete"},
		{models.Advance.String(), "advance"}, {models.Kind(9).String(), "Kind(9)"},
		{models.OK.String(), "ok"}, {models.Stale.String(), "stale"}, {models.NotFound.String(), "not found"},
		{models.Unknown.String(), "unknown"}, {models.Outcome(9).String(), "Outcome(9)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q; want %q", c.got, c.want)
		}
	}
}
