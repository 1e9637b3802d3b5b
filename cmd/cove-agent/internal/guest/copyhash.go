package guest

import (
	"hash"
	"io"
)

// hashAhead is how many pieces of a body may be read and written while
// the hash is behind: the buffers copyHashed holds, each of copyBuffer.
const hashAhead = 3

// copyHashed copies r to w and into h. Each piece is hashed by a
// goroutine of its own while it is written and the next pieces are read:
// the body's sha-256 costs as much CPU as reading and writing it, and
// done in turn with them it made the upload's pace that of one core doing
// all three. h receives the pieces in order, all of the ones written by
// the time copyHashed returns.
func copyHashed(w io.Writer, r io.Reader, h hash.Hash) (int64, error) {
	free := make(chan *[]byte, hashAhead)
	for range hashAhead {
		free <- bufPool.Get().(*[]byte)
	}
	todo := make(chan []byte, hashAhead)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range todo {
			h.Write(b)
			free <- &b
		}
	}()
	var n int64
	err := func() error {
		for {
			bp := <-free
			m, rerr := r.Read((*bp)[:cap(*bp)])
			if m > 0 {
				wm, werr := w.Write((*bp)[:m])
				if werr == nil && wm < m {
					werr = io.ErrShortWrite
				}
				n += int64(wm)
				todo <- (*bp)[:m]
				if werr != nil {
					return werr
				}
			} else {
				free <- bp
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	}()
	close(todo)
	<-done
	for range hashAhead {
		bp := <-free
		*bp = (*bp)[:cap(*bp)]
		bufPool.Put(bp)
	}
	return n, err
}
