# hostd's make targets. Each target is small; add yours below.

GO ?= go

.PHONY: plugins
# plugins builds every plugin in plugins/ to bin/plugins/<name>.wasm
# (the documented build line; built .wasm files are not committed).
plugins:
	@mkdir -p bin/plugins
	@set -e; for d in plugins/*/; do \
		n=$$(basename $$d); \
		echo "plugin $$n -> bin/plugins/$$n.wasm"; \
		(cd $$d && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o ../../bin/plugins/$$n.wasm .); \
	done
