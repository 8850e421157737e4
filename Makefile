# Relay build. `make` builds build/relay; `make SAN=1` builds the
# AddressSanitizer + UndefinedBehaviorSanitizer variant into build-san/.
# Dependencies come from Debian packages via pkg-config (scripts/install-deps).

CC      ?= cc
PKGS    := hiredis libfyaml jansson libcurl libarchive libmicrohttpd libgit2 sqlite3 openssl icu-uc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

ifeq ($(SAN),1)
BUILD   ?= build-san
OPT     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
BUILD   ?= build
OPT     := -O2 -g
endif

CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
           -Isrc $(OPT) $(PKG_CFLAGS) -MMD -MP
LDFLAGS += $(OPT)
LDLIBS  += $(PKG_LIBS) -lpthread -lm

LIB_SRC   := $(filter-out src/main.c,$(wildcard src/*.c src/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# In-process integration programs (real Redis/Docker), run by tests/run.
ITC_SRC   := $(wildcard tests/it/*.c)
ITC_BIN   := $(ITC_SRC:tests/it/%.c=$(BUILD)/it/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all tests bench clean fuzz install
all: $(BUILD)/relay
tests: $(BUILD)/relay $(UNIT_BIN) $(ITC_BIN)
bench: $(BENCH_BIN)

$(BUILD)/relay: $(BUILD)/src/main.o $(BUILD)/librelay.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/librelay.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c tests/unit/t.h $(BUILD)/librelay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/librelay.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/it/%: tests/it/%.c tests/unit/t.h $(BUILD)/librelay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/librelay.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/librelay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/librelay.a $(LDFLAGS) $(LDLIBS)

# libFuzzer targets compile Relay's own sources with clang (Debian's
# libraries are not instrumented): once, into build-fuzz/librelay.a
# (-fsanitize=fuzzer-no-link: coverage instrumentation without libFuzzer's
# main), and each tests/fuzz/fuzz_X.c is one target linked against it.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_OBJ := $(LIB_SRC:%.c=build-fuzz/%.o)
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
               -Isrc $(PKG_CFLAGS) -MMD -MP
fuzz: $(FUZZ_BIN)
build-fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
build-fuzz/librelay.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^
build-fuzz/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) build-fuzz/librelay.a
	@mkdir -p build-fuzz
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< build-fuzz/librelay.a $(PKG_LIBS) -lpthread -lm

clean:
	rm -rf build build-san build-fuzz

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the binary, the systemd unit
# (its ExecStart= rewritten to $(PREFIX)/bin/relay) and the man page. Needs
# no root when DESTDIR is a directory the user can write; sets no owner.
PREFIX  ?= /usr/local
BINDIR  := $(PREFIX)/bin
UNITDIR := $(PREFIX)/lib/systemd/system
MAN1DIR := $(PREFIX)/share/man/man1
install: $(BUILD)/relay deploy/relay.service docs/relay.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MAN1DIR)
	install -m 0755 $(BUILD)/relay $(DESTDIR)$(BINDIR)/relay
	@tmp=$(DESTDIR)$(UNITDIR)/relay.service.tmp; \
	sed 's|^ExecStart=/usr/local/bin/relay |ExecStart=$(BINDIR)/relay |' deploy/relay.service >$$tmp && \
	grep -qx 'ExecStart=$(BINDIR)/relay start' $$tmp && chmod 0644 $$tmp && \
	mv -f $$tmp $(DESTDIR)$(UNITDIR)/relay.service || \
	{ rm -f $$tmp; echo "install: cannot write relay.service with ExecStart=$(BINDIR)/relay" >&2; exit 1; }
	install -m 0644 docs/relay.1 $(DESTDIR)$(MAN1DIR)/relay.1

-include $(LIB_OBJ:.o=.d) $(BUILD)/src/main.d $(UNIT_BIN:=.d) $(ITC_BIN:=.d) $(BENCH_BIN:=.d)
-include $(FUZZ_OBJ:.o=.d) $(FUZZ_BIN:=.d)
