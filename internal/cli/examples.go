package cli

import "github.com/spf13/cobra"

// examples are the Example sections of the commands that do not carry
// their own, by command path.
var examples = map[string]string{
	"cove admin":                 "  cove admin migrate-store --help",
	"cove admin migrate-store":   "  cove admin migrate-store --from sqlite:/var/lib/cove/cove.db --to postgres://cove@db/cove --saves s3://bucket/saves",
	"cove bench":                 "  cove bench --help",
	"cove completion":            "  source <(cove completion bash)\n  cove completion zsh > \"${fpath[1]}/_cove\"",
	"cove completion bash":       "  source <(cove completion bash)",
	"cove completion fish":       "  cove completion fish > ~/.config/fish/completions/cove.fish",
	"cove completion powershell": "  cove completion powershell | Out-String | Invoke-Expression",
	"cove completion zsh":        "  cove completion zsh > \"${fpath[1]}/_cove\"",
	"cove control":               "  cove control --help",
	"cove create":                "  cove create --name demo\n  cove create --name big --memory 4096 --cpus 2",
	"cove events":                "  cove events\n  cove events --sandbox demo --type sandbox.running,command.exited",
	"cove watch":                 "  cove watch demo /workspace -r\n  cove watch demo /workspace -r --after 1764748800000012 --json",
	"cove exec":                  "  cove exec demo -- python3 -c 'print(6*7)'\n  echo hello | cove exec demo -- wc -c\n  cove exec demo --detach -- sh -c 'sleep 5; echo done'",
	"cove files":                 "  cove files ls demo:/workspace\n  cove files put app.py demo:/workspace/app.py",
	"cove files cat":             "  cove files cat demo:/workspace/app.py",
	"cove files edit":            "  cove files edit demo:/workspace/app.py --old 'x = 1' --new 'x = 2'",
	"cove files get":             "  cove files get demo:/workspace/out.txt out.txt\n  cove files get demo:/workspace/out.txt -",
	"cove files ls":              "  cove files ls demo:/workspace",
	"cove files mkdir":           "  cove files mkdir demo:/workspace/build",
	"cove files mv":              "  cove files mv demo:/workspace/a.txt /workspace/b.txt",
	"cove files put":             "  cove files put app.py demo:/workspace/app.py\n  echo hi | cove files put - demo:/workspace/hi.txt",
	"cove files rm":              "  cove files rm demo:/workspace/tmp.txt",
	"cove get":                   "  cove get demo\n  cove get demo --json",
	"cove images":                "  cove images ls",
	"cove images get":            "  cove images get myimage",
	"cove images import":         "  cove images import image.tar --name myimage",
	"cove images ls":             "  cove images ls --json",
	"cove images rm":             "  cove images rm myimage",
	"cove images update":         "  cove images update myimage --help",
	"cove logs":                  "  cove logs demo cmd_123 --follow",
	"cove ls":                    "  cove ls\n  cove ls --json",
	"cove mcp":                   "  cove mcp",
	"cove metrics":               "  cove metrics demo",
	"cove network":               "  cove network demo",
	"cove node":                  "  cove node --help",
	"cove nodes":                 "  cove nodes ls",
	"cove nodes drain":           "  cove nodes drain node-2",
	"cove nodes ls":              "  cove nodes ls --json",
	"cove nodes rm":              "  cove nodes rm node-2",
	"cove nodes token":           "  cove nodes token --rotate",
	"cove nodes undrain":         "  cove nodes undrain node-2",
	"cove preview":               "  cove preview demo 8000\n  cove preview demo 8000 --public",
	"cove rm":                    "  cove rm demo\n  cove rm demo other",
	"cove secrets":               "  cove secrets ls",
	"cove secrets ls":            "  cove secrets ls",
	"cove secrets rm":            "  cove secrets rm OPENAI_KEY",
	"cove secrets set":           "  cove secrets set OPENAI_KEY    # reads the value without echo",
	"cove serve":                 "  cove serve\n  cove serve --listen 0.0.0.0:7070",
	"cove sh":                    "  cove sh demo",
	"cove sleep":                 "  cove sleep demo",
	"cove snapshot":              "  cove snapshot create demo deps-ready\n  cove snapshot restore demo deps-ready",
	"cove snapshot create":       "  cove snapshot create demo deps-ready",
	"cove snapshot get":          "  cove snapshot get deps-ready",
	"cove snapshot ls":           "  cove snapshot ls --sandbox demo",
	"cove snapshot rm":           "  cove snapshot rm deps-ready",
	"cove snapshot restore":      "  cove snapshot restore demo deps-ready",
	"cove fork":                  "  cove fork demo -n 5\n  cove fork demo -n 2 --names try-a,try-b",
	"cove teams":                 "  cove teams create my-agent\n  cove teams key team_123",
	"cove teams admit":           "  cove teams admit team_123 --help",
	"cove teams create":          "  cove teams create my-agent",
	"cove teams key":             "  cove teams key team_123\n  cove teams key team_123 --e2b",
	"cove teams limit":           "  cove teams limit team_123 50",
	"cove teams me":              "  cove teams me",
	"cove templates":             "  cove templates ls",
	"cove usage":                 "  cove usage\n  cove usage demo",
	"cove wake":                  "  cove wake demo",
	"cove webhooks":              "  cove webhooks ls",
	"cove webhooks add":          "  cove webhooks add https://hooks.example.com/cove",
	"cove webhooks deliveries":   "  cove webhooks deliveries wh_123",
	"cove webhooks ls":           "  cove webhooks ls",
	"cove webhooks rm":           "  cove webhooks rm wh_123",
	"cove workloads":             "  cove workloads list",
	"cove workloads cancel":      "  cove workloads cancel wl_123",
	"cove workloads get":         "  cove workloads get wl_123",
	"cove workloads list":        "  cove workloads list",
	"cove workloads logs":        "  cove workloads logs wl_123 --follow",
}

// setExamples gives every command without an Example its entry from
// examples (cobra's completion commands included).
func setExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	walk(root, func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[c.CommandPath()]
		}
	})
}
