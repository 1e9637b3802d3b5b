package observe

import (
	"fmt"
	"testing"

	"github.com/cove-dev/cove/api"
)

// BenchmarkCommandNamed reports how often a connection is named after its
// command (named/conn) when the whole connection lasts a few milliseconds
// (a test host on the same machine answering at once: the race between the
// agent's lookup and the client closing its socket) and when the
// destination takes slowReply to answer, as a distant one does.
func BenchmarkCommandNamed(b *testing.B) {
	for _, path := range []string{"/", "/slow"} {
		b.Run(fmt.Sprintf("path=%s", path), func(b *testing.B) {
			s, _, sb := obsSandbox(b)
			named := 0
			for i := range b.N {
				id := run(b, s, sb.ID, curl+"-o /dev/null http://web.test"+path, 0)
				o := waitObservation(b, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.Count == int64(i+1) })
				if o.LastCommandID == id {
					named++
				}
			}
			b.ReportMetric(float64(named)/float64(b.N), "named/conn")
		})
	}
}
