package catalog

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

const childEnv = "HOSTD_CATALOG_SEQ_CHILD_DIR"

// seqChild runs in a re-executed test binary: it allocates sequence values
// forever, printing each after NextSequence returned, until killed.
func seqChild() {
	o := testOptions(os.Getenv(childEnv))
	o.SequenceBlock = 7
	db, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriterSize(os.Stdout, 64)
	for i := 0; ; i++ {
		n := uint64(i%3 + 1)
		v, err := db.NextSequence(context.Background(), "fence", n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Fprintf(w, "%d\n", v+n-1) // the largest value handed out
		w.Flush()
	}
}

// TestSequenceNeverReusedAcrossSIGKILL kills a child process allocating
// sequence values and checks the reopened catalog continues above every
// value the child handed out.
func TestSequenceNeverReusedAcrossSIGKILL(t *testing.T) {
	dir := t.TempDir()
	for round := 0; round < 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var maxSeen uint64
		for lines := 0; lines < 200+round*50 && sc.Scan(); lines++ {
			v, err := strconv.ParseUint(sc.Text(), 10, 64)
			if err != nil {
				t.Fatalf("child output %q", sc.Text())
			}
			if v <= maxSeen {
				t.Fatalf("child handed out %d after %d", v, maxSeen)
			}
			maxSeen = v
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if maxSeen == 0 {
			t.Fatal("child printed nothing")
		}
		db, err := Open(testOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		v, err := db.NextSequence(context.Background(), "fence", 1)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if v <= maxSeen {
			t.Fatalf("round %d: after SIGKILL got %d, child had handed out up to %d", round, v, maxSeen)
		}
		t.Logf("round %d: child reached %d, reopened catalog continued at %d", round, maxSeen, v)
	}
}
