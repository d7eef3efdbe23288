package toolgate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	toolgate "toolgate.dev/client"
)

// An agent's tool calls, each run only when the sidecar at $TOOLGATE_URL
// allows it. (Under `go test` that is the sidecar TestMain started.)
func ExampleClient_Guard() {
	client, err := toolgate.New("", toolgate.WithApprovalTimeout(0))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	calls := []struct {
		tool string
		args map[string]any
	}{
		{"lookup", map[string]any{"q": "weather in Oslo"}},
		{"bash", map[string]any{"command": "rm -rf /"}},
		{"publish", map[string]any{"package": "toolgate"}},
	}
	for _, call := range calls {
		err := client.Guard(ctx, call.tool, call.args, func(ctx context.Context) error {
			fmt.Printf("%s: ran\n", call.tool)
			return nil
		})
		switch {
		case err == nil:
		case errors.Is(err, toolgate.ErrDenied):
			var e *toolgate.Error
			errors.As(err, &e)
			fmt.Printf("%s: denied (%s)\n", call.tool, e.Reason)
		case errors.Is(err, toolgate.ErrApprovalRequired):
			fmt.Printf("%s: waiting for a human\n", call.tool)
		default:
			// The sidecar is down or answered nonsense: nothing ran.
			log.Fatal(err)
		}
	}
	// Output:
	// lookup: ran
	// bash: denied (deny_rule)
	// publish: waiting for a human
}
