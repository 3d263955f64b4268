package lab

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// scenarioLine is one scenario's report in a run's output: its number and
// the status in brackets at the end.
var scenarioLine = regexp.MustCompile(`^(\d+)\. .*\[([^\]]*)\]$`)

// Verdict reads the output of a fencelab run, for the tests of each
// backend. It returns an error unless the output reports every one of the
// ScenarioCount scenarios and each either behaved as expected or was
// skipped; skipped is "" when none was, and otherwise names the skipped
// scenarios and why (lock.ErrUnsupported: the backend answered that it
// cannot serve permits), for a t.Skip.
func Verdict(out string) (skipped string, err error) {
	seen := map[int]bool{}
	var nums []string
	var why string
	for _, line := range strings.Split(out, "\n") {
		m := scenarioLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		seen[n] = true
		switch status := m[2]; {
		case status == "ok":
		case strings.HasPrefix(status, "SKIPPED: "):
			nums = append(nums, m[1])
			why = strings.TrimPrefix(status, "SKIPPED: ")
		default:
			return "", fmt.Errorf("scenario %d: %s", n, status)
		}
	}
	for i := 1; i <= ScenarioCount(); i++ {
		if !seen[i] {
			return "", fmt.Errorf("scenario %d missing from the output", i)
		}
	}
	if len(nums) == 0 {
		if !strings.Contains(out, fmt.Sprintf("all %d scenarios behaved as expected", ScenarioCount())) {
			return "", fmt.Errorf("the run does not end with all %d scenarios behaving as expected", ScenarioCount())
		}
		return "", nil
	}
	return fmt.Sprintf("scenarios %s skipped: %s", strings.Join(nums, ", "), why), nil
}
