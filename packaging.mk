# Installing and packaging (included by the top Makefile after the parts):
#   make install [PREFIX=/usr/local] [DESTDIR=]   what the parts list in BINS,
#                        LIBEXEC, PLUGINS, MAN1, MAN8, SHARE_FILES, plus the
#                        plugstack.conf line
#   make install-config  a commented /etc/skiff/skiff.conf, if there is none yet
#   make dist            $(BUILD)/dist/skiff-VERSION.tar.gz: the tracked files,
#                        reproducible (same bytes for the same tree)
#   make deb             .debs from the dist tarball (debian/), in $(BUILD)/deb
#   make rpm             .rpms from the dist tarball (skiff.spec), in $(BUILD)/rpm
# Packages and `make install` put the same files in the same places: debian/rules
# and skiff.spec run `make install` with the distribution's directories.
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(DATADIR)/man
# skiff reads /etc/skiff/skiff.conf whatever the prefix (runtime/lib/config.h)
SYSCONFDIR ?= /etc
# Helpers and hooks go to LIBEXECDIR/skiff, spank_skiff.so to SLURM_PLUGIN_DIR,
# SHARE_FILES to DATADIR/skiff (set in the Makefile, before the parts use them
# in compiled-in paths).

# The compiled-in directories live in objects that do not otherwise change
# with them: a stamp that changes when they do rebuilds those objects, so
# `make install PREFIX=/usr` after a plain `make` installs binaries that look
# in /usr.
INSTALL_DIRS := $(LIBEXECDIR) $(SLURM_PLUGIN_DIR) $(DATADIR)
INSTALL_DIRS_STAMP := $(BUILD)/install-dirs
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(INSTALL_DIRS_STAMP) 2>/dev/null)" = '$(INSTALL_DIRS)' ] || \
        echo '$(INSTALL_DIRS)' >$(INSTALL_DIRS_STAMP); })
$(BUILD)/runtime/lib/config.o $(BUILD)/pic/runtime/lib/config.o $(BUILD)/pic/plugin/userproc.o \
  $(BUILD)/trainer/tokenizer.o: $(INSTALL_DIRS_STAMP)

# The plugstack.conf line and the commented skiff.conf, with this build's paths.
PLUGSTACK_SNIPPET := $(BUILD)/plugstack.conf
SKIFF_CONF := $(BUILD)/skiff.conf
$(PLUGSTACK_SNIPPET): plugin/plugstack.conf.in $(INSTALL_DIRS_STAMP)
	sed -e 's|@PLUGIN@|$(SLURM_PLUGIN_DIR)/$(notdir $(SPANK_SKIFF))|' -e 's|@DATADIR@|$(DATADIR)|' $< >$@
$(SKIFF_CONF): runtime/skiff.conf.in $(INSTALL_DIRS_STAMP)
	sed -e 's|@HOOKS_DIR@|$(LIBEXECDIR)/skiff/hooks|' $< >$@

# Everything `make install` installs, and nothing else (`make` also builds
# the test and emulation tools, which are not installed).
installable: $(BINS) $(LIBEXEC) $(PLUGINS) $(PLUGSTACK_SNIPPET) $(SKIFF_CONF)

# PLUGINS holds spank_skiff.so (Slurm's plugin directory) and the programs
# it execs (LIBEXECDIR/skiff, where the plugin looks when they are not
# beside it: plugin/userproc.c).
install: installable
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)/skiff/hooks $(DESTDIR)$(SLURM_PLUGIN_DIR) \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DATADIR)/skiff
	$(if $(BINS),install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/)
	$(if $(LIBEXEC),install -m 755 $(LIBEXEC) $(DESTDIR)$(LIBEXECDIR)/skiff/hooks/)
	$(if $(filter %.so,$(PLUGINS)),install -m 644 $(filter %.so,$(PLUGINS)) $(DESTDIR)$(SLURM_PLUGIN_DIR)/)
	$(if $(filter-out %.so,$(PLUGINS)),install -m 755 $(filter-out %.so,$(PLUGINS)) $(DESTDIR)$(LIBEXECDIR)/skiff/)
	$(if $(MAN1),install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/)
	$(if $(MAN8),install -m 644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/)
	install -m 644 $(PLUGSTACK_SNIPPET) $(DESTDIR)$(DATADIR)/skiff/plugstack.conf
	$(if $(SHARE_FILES),install -m 644 $(SHARE_FILES) $(DESTDIR)$(DATADIR)/skiff/)

# An admin's skiff.conf is never overwritten.
install-config: $(SKIFF_CONF)
	install -d $(DESTDIR)$(SYSCONFDIR)/skiff
	[ -e $(DESTDIR)$(SYSCONFDIR)/skiff/skiff.conf ] || install -m 644 $(SKIFF_CONF) $(DESTDIR)$(SYSCONFDIR)/skiff/skiff.conf

# --- source tarball and packages ---------------------------------------------------
DIST_NAME := skiff-$(VERSION)
DIST_TARBALL := $(BUILD)/dist/$(DIST_NAME).tar.gz
dist:
	scripts/make-dist $(BUILD)/dist

# Built in a copy unpacked from the tarball, so the checkout is untouched and
# the packages hold only tracked files. DEB_BUILD_OPTIONS=nocheck skips the
# unit tests; DEB_BUILD_PROFILES=nocuda the CUDA trainer package.
DEB_BUILD_OPTIONS ?= parallel=2
DEB_BUILD_PROFILES ?= $(if $(NVCC),,nocuda)
deb: dist
	scripts/install-deps package
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb
	tar -xzf $(DIST_TARBALL) -C $(BUILD)/deb
	cd $(BUILD)/deb/$(DIST_NAME) && DEB_BUILD_OPTIONS='$(DEB_BUILD_OPTIONS)' DEB_BUILD_PROFILES='$(DEB_BUILD_PROFILES)' dpkg-buildpackage -us -uc -b
	lintian --fail-on error --info $(BUILD)/deb/*.changes

# Debian's rpm has an empty package database, so rpmbuild cannot check
# BuildRequires here (--nodeps); on EL/Fedora they are checked as usual.
RPMBUILD_FLAGS ?= $(if $(wildcard /etc/debian_version),--nodeps)
rpm: dist
	scripts/install-deps package
	rm -rf $(BUILD)/rpm && mkdir -p $(BUILD)/rpm
	rpmbuild -bb $(RPMBUILD_FLAGS) --define '_topdir $(abspath $(BUILD)/rpm)' \
	  --define '_sourcedir $(abspath $(BUILD)/dist)' skiff.spec

# pkg-install: `make install` in a private mount namespace, steps through the
# installed plugin. pkg-deb: the .deb built in a scratch directory, installed,
# steps through it, purged.
INTEGRATION_TESTS += tests/integration/pkg-install.sh tests/integration/pkg-deb.sh

.PHONY: installable install install-config dist deb rpm
