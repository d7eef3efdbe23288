package toolgate

// The client against the agent API's OpenAPI document
// (docs/agent-api.openapi.json, generated from the sidecar's Rust types):
// it knows every error code the document lists and no other, and each
// answer type reads every member of its schema and none the schema lacks.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

type openAPISchema struct {
	Enum       []string                   `json:"enum"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
	OneOf      []struct {
		Const string `json:"const"`
	} `json:"oneOf"`
}

func openAPISchemas(t *testing.T) map[string]openAPISchema {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "agent-api.openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]openAPISchema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas
}

func sorted(names []string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return out
}

func TestErrorCodesAreTheDocuments(t *testing.T) {
	documented := openAPISchemas(t)["ErrorCode"].Enum
	if len(documented) < 30 {
		t.Fatalf("the ErrorCode enum was not found: %v", documented)
	}
	if got, want := sorted(SidecarCodes()), sorted(documented); !reflect.DeepEqual(got, want) {
		t.Fatalf("client codes %v\ndocument's codes %v", got, want)
	}
	for _, own := range []string{CodeSidecarUnreachable, CodeBadResponse} {
		for _, c := range documented {
			if c == own {
				t.Fatalf("%s is the client's own code, yet the sidecar sends it", own)
			}
		}
	}
}

func TestAnswerTypesReadEveryMemberOfTheirSchema(t *testing.T) {
	schemas := openAPISchemas(t)
	cases := map[string]any{
		"AuthorizeResponse": Decision{},
		"BatchResponse":     Batch{},
		"RunStatus":         RunStatus{},
		"RunBudgets":        RunBudgets{},
		"BudgetUse":         Budget{},
		"CancelResponse":    Cancellation{},
		"PodCancelResponse": PodCancellation{},
		"FlowLabel":         FlowLabel{},
		"FileRead":          FileContent{},
		"FileWritten":       Written{},
		"Listing":           Listing{},
		"Entry":             Entry{},
		"Stat":              FileStat{},
	}
	for schema, value := range cases {
		var members []string
		for name := range schemas[schema].Properties {
			members = append(members, name)
		}
		var read []string
		for name := range jsonNames(reflect.TypeOf(value)) {
			read = append(read, name)
		}
		if len(members) == 0 || !reflect.DeepEqual(sorted(read), sorted(members)) {
			t.Errorf("%s: the client reads %v\nthe document lists %v", schema, sorted(read), sorted(members))
		}
	}
	var verdicts []string
	for _, v := range schemas["Decision"].OneOf {
		verdicts = append(verdicts, v.Const)
	}
	if want := []string{VerdictAllow, VerdictDeny, VerdictEscalate}; !reflect.DeepEqual(sorted(verdicts), want) {
		t.Errorf("verdicts %v, want %v", verdicts, want)
	}
}

// Rows are read in part (an intent as the pending list gives it, an
// approval), but never a member the sidecar does not write.
func TestRowTypesReadOnlyMembersOfTheirSchema(t *testing.T) {
	schemas := openAPISchemas(t)
	for schema, value := range map[string]any{"OpenIntent": Intent{}, "ApprovalView": Approval{}} {
		documented := schemas[schema].Properties
		if len(documented) == 0 {
			t.Fatalf("%s is not in the document", schema)
		}
		for name := range jsonNames(reflect.TypeOf(value)) {
			if _, ok := documented[name]; !ok {
				t.Errorf("%s: the client reads %q, which the sidecar does not write", schema, name)
			}
		}
	}
}
