# vmkeeper. `make packages` builds the .deb and the .rpm into out/packages/ (see docs/installing.md).

.PHONY: all packages clean-packages

all: packages

packages:
	packaging/build-packages.sh

clean-packages:
	rm -rf out/packages out/build
