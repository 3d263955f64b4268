package models

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// lockOp builds one operation of a token history.
func lockOp(client int, name string, op LockOp, owner string, out LockOutcome, token, call, ret int64) porcupine.Operation {
	return porcupine.Operation{
		ClientId: client,
		Input:    TokenInput{Name: name, Op: op, Owner: owner},
		Output:   TokenOutput{Outcome: out, Token: token},
		Call:     call,
		Return:   ret,
	}
}

func acq(client int, owner string, token, call, ret int64) porcupine.Operation {
	return lockOp(client, "l", LockAcquire, owner, LockOK, token, call, ret)
}

func TestTokensAcceptsLegalHistories(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"increasing with gaps": {acq(0, "a", 3, 0, 10), acq(1, "b", 7, 20, 30), acq(0, "c", 100, 40, 50)},
		"concurrent acquires in either order": {
			acq(0, "a", 1, 0, 10), acq(1, "b", 3, 20, 30), acq(2, "c", 2, 25, 40), acq(0, "d", 4, 50, 60),
		},
		"same owner re-acquires its own token": {acq(0, "a", 5, 0, 10), acq(0, "a", 5, 20, 30)},
		"tokens shared across names": {
			acq(0, "a", 1, 0, 10),
			lockOp(1, "m", LockAcquire, "b", LockOK, 2, 20, 30),
			acq(0, "c", 3, 40, 50),
			lockOp(1, "m", LockAcquire, "d", LockOK, 4, 60, 70),
		},
		"release then a new token": {
			acq(0, "a", 1, 0, 10),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 20, 30),
			acq(0, "a", 2, 40, 50),
		},
		"unknown acquire, then its retry gets a token": {
			lockOp(0, "l", LockAcquire, "a", LockUnknown, 0, 0, 100),
			acq(0, "a", 9, 110, 120),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 130, 140),
		},
		"unknown acquire that landed, released by its owner": {
			lockOp(0, "l", LockAcquire, "a", LockUnknown, 0, 0, 100),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 110, 120),
			acq(1, "b", 1, 130, 140),
		},
		"holder's extend and release refused after it expired": {
			acq(0, "a", 1, 0, 10),
			lockOp(0, "l", LockExtend, "a", LockRefused, 0, 20, 30),
			lockOp(0, "l", LockRelease, "a", LockRefused, 0, 40, 50),
			acq(1, "b", 2, 60, 70),
		},
	}
	for name, hist := range cases {
		if r := porcupine.CheckOperations(Tokens(TokenState{}), hist); !r {
			t.Errorf("%s: not linearizable, want legal", name)
		}
	}
}

func TestTokensRefusesIllegalHistories(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"a token below one that returned before": {acq(0, "a", 5, 0, 10), acq(1, "b", 4, 20, 30)},
		"distinct owners, equal tokens":          {acq(0, "a", 5, 0, 10), acq(1, "b", 5, 20, 30)},
		"equal tokens even when concurrent":      {acq(0, "a", 5, 0, 30), acq(1, "b", 5, 10, 40)},
		"token 0":                                {acq(0, "a", 0, 0, 10)},
		"a re-acquire after release keeps its token": {
			acq(0, "a", 1, 0, 10),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 20, 30),
			acq(0, "a", 1, 40, 50),
		},
		"the old holder gets its token back after a newer one": {
			acq(0, "a", 1, 0, 10), acq(1, "b", 2, 20, 30), acq(0, "a", 1, 40, 50),
		},
		"the old holder's release succeeds after a newer acquire": {
			acq(0, "a", 1, 0, 10), acq(1, "b", 2, 20, 30),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 40, 50),
		},
		"the old holder's extend succeeds after a newer acquire": {
			acq(0, "a", 1, 0, 10), acq(1, "b", 2, 20, 30),
			lockOp(0, "l", LockExtend, "a", LockOK, 0, 40, 50),
		},
		"a release by an owner that never acquired": {
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 0, 10),
		},
		"a second release succeeds": {
			acq(0, "a", 1, 0, 10),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 20, 30),
			lockOp(0, "l", LockRelease, "a", LockOK, 0, 40, 50),
		},
		"a regression hidden behind an unknown acquire": {
			acq(0, "a", 5, 0, 10),
			lockOp(1, "l", LockAcquire, "b", LockUnknown, 0, 20, 100),
			acq(2, "c", 3, 110, 120),
		},
	}
	for name, hist := range cases {
		if porcupine.CheckOperations(Tokens(TokenState{}), hist) {
			t.Errorf("%s: linearizable, want illegal", name)
		}
	}
}

// A history that starts from a known state: what the chaos checker does
// with each segment after the first.
func TestTokensFromAState(t *testing.T) {
	init := TokenState{Last: 10, Holder: "a"}
	if !porcupine.CheckOperations(Tokens(init), []porcupine.Operation{acq(0, "a", 10, 0, 10), acq(1, "b", 11, 20, 30)}) {
		t.Error("the holder's own token and then a higher one: refused")
	}
	if porcupine.CheckOperations(Tokens(init), []porcupine.Operation{acq(1, "b", 10, 0, 10)}) {
		t.Error("another owner got the holder's token: accepted")
	}
}

func TestLockOpAndOutcomeNames(t *testing.T) {
	for v, want := range map[fmtStringer]string{
		LockAcquire: "acquire", LockExtend: "extend", LockRelease: "release", LockOp(9): "LockOp(9)",
		LockOK: "ok", LockRefused: "refused", LockUnknown: "unknown", LockOutcome(9): "LockOutcome(9)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

type fmtStringer interface{ String() string }
