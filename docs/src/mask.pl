#!/usr/bin/perl
# mask.pl (run by scripts/gen-docs.sh): masks what changes from run to run (ids, pids, IPs, timings, dates, host
# names) in podlab output, and re-aligns tabwriter tables afterwards, so the
# docs are byte-for-byte stable. Env: MASK_IDS (file: "<64-hex id> <label>"
# lines), MASK_PATHS ("from=to" pairs separated by "|"), MASK_NODE,
# MASK_HOSTIPS (space-separated).
use strict;
use warnings;
use utf8;
# :utf8 rather than `use open`: perl-base (always on Debian) lacks open.pm.
binmode(STDIN, ':utf8');
binmode(STDOUT, ':utf8');
binmode(STDERR, ':utf8');

my %ids;    # 64-hex and 12-hex → label
if (my $f = $ENV{MASK_IDS}) {
    if (open(my $fh, '<', $f)) {
        while (<$fh>) {
            my ($id, $label) = split ' ', $_, 2;
            next unless $id && $label;
            chomp $label;
            $ids{$id} = $label;
            $ids{substr($id, 0, 12)} = $label;
        }
    }
}
my @paths = map { [split /=/, $_, 2] } grep { length } split /\|/, ($ENV{MASK_PATHS} // '');
my $node = $ENV{MASK_NODE} // '';
my @hostips = grep { length } split ' ', ($ENV{MASK_HOSTIPS} // '');

sub mask {
    my ($s) = @_;
    $s =~ tr/\x{a0}/ /;    # go-cmp's reports use U+00A0 at random, on purpose
    for my $p (@paths) { $s =~ s/\Q$p->[0]\E/$p->[1]/g }
    $s =~ s/\b([0-9a-f]{64})\b/$ids{$1} \/\/ '<id>'/ge;
    $s =~ s/\b([0-9a-f]{12})\b/$ids{$1} \/\/ $1/ge;
    # the kubelet half's pod dirs are named by pod uid, also where go-cmp
    # cuts a long path short
    $s =~ s{(/kubelet/pods/)[0-9a-f][0-9a-f-]*}{$1<uid>}g;
    $s =~ s/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/<uid>/g;
    $s =~ s{/proc/\d+/}{/proc/<pid>/}g;
    $s =~ s/\b(pid|PID) \d+/$1 <pid>/g;
    $s =~ s/\b10\.77\.(\d+)\.(\d+)\b/($1 eq '0' && $2 eq '1') ? $& : '10.77.x.y'/ge;
    for my $ip (@hostips) { $s =~ s/(?<![\d.])\Q$ip\E(?![\d.])/<host-ip>/g }
    $s =~ s/\b\Q$node\E\b/<node>/g if length $node;
    $s =~ s{/tmp/podlab-demo-\d+}{/tmp/podlab-demo-XXXXXX}g;
    $s =~ s/\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/<time>/g;
    $s =~ s/\b(\d+(\.\d+)?(ms|s|m|h|d))+ ago\b/<age>/g;
    $s =~ s/\bin \d+\.\ds\b/in N.Ns/g;
    return $s;
}

# A tabwriter table starts at a header line: upper-case cells separated by
# two or more spaces.
sub header_cols {
    my ($line) = @_;
    return () unless $line =~ /^( *)[A-Z]/;
    my $indent = length $1;
    my @cells = split /\s{2,}/, substr($line, $indent);
    return () if @cells < 2 || grep { !/^[A-Z][A-Z0-9 ]*$/ } @cells;
    my @cols;
    push @cols, $-[1] while $line =~ /(\S+(?: \S+)*)/g;
    return ($indent, @cols);
}

# Host-dependent rows of the live process's mount table: the cgroup
# hierarchy (v1 controllers or v2) and runc's masked and read-only paths,
# which depend on the kernel.
sub host_dependent {
    my ($header, @cells) = @_;
    return 0 unless $header =~ /FSTYPE/;
    return 1 if $cells[0] =~ m{^/sys/fs/cgroup};
    return 1 if grep { $_ eq 'masked' || $_ eq 'readonly-path' } @cells;
    return 0;
}

sub flush_table {
    my ($out, $header, $indent, $cols, $rows) = @_;
    my $pad;
    my @table;
    my $dropped = 0;
    my @headers = map { s/\s+$//r } map { substr($header, $cols->[$_], ($_ < $#$cols ? $cols->[$_ + 1] : length $header) - $cols->[$_]) } 0 .. $#$cols;
    for my $line ($header, @$rows) {
        my @cells;
        for my $i (0 .. $#$cols) {
            my $from = $cols->[$i];
            my $to = $i < $#$cols ? $cols->[$i + 1] : length($line);
            my $cell = $from < length($line) ? substr($line, $from, $to - $from) : '';
            if ($i < $#$cols && $to <= length($line)) {
                my ($gap) = $cell =~ /( +)$/;
                my $g = defined $gap ? length($gap) : 0;
                # the widest cell of a column is followed by exactly the padding
                $pad = $g if $g >= 2 && (!defined $pad || $g < $pad);
            }
            $cell =~ s/\s+$//;
            push @cells, $cell;
        }
        if ($line ne $header && host_dependent($header, @cells)) { $dropped++; next }
        if ($line ne $header) {
            for my $i (0 .. $#headers) {
                $cells[$i] = '<pid>' if $headers[$i] =~ /\bPID$/ && $cells[$i] =~ /^\d+$/;
            }
        }
        push @table, [map { mask($_) } @cells];
    }
    $pad //= 2;
    my @w;
    for my $r (@table) {
        for my $i (0 .. $#$r) {
            my $l = length $r->[$i];
            $w[$i] = $l if !defined $w[$i] || $l > $w[$i];
        }
    }
    for my $r (@table) {
        my $s = ' ' x $indent;
        my $last = $#$r;
        $last-- while $last > 0 && $r->[$last] eq '';
        for my $i (0 .. $last) {
            $s .= $r->[$i];
            $s .= ' ' x ($w[$i] - length($r->[$i]) + $pad) if $i < $last;
        }
        $s =~ s/\s+$//;
        push @$out, $s;
    }
    push @$out, (' ' x $indent) . "… host-dependent rows left out: /sys/fs/cgroup, runc's masked and read-only paths" if $dropped;
}

# Does $line continue the table whose columns start at @$cols? Rows start
# with the header's indentation and have at least two spaces before every
# column they reach.
sub is_row {
    my ($line, $indent, $cols) = @_;
    return 0 if $line =~ /^\s*$/;
    return 0 if substr($line, 0, $indent) ne ' ' x $indent || substr($line, $indent, 1) eq ' ';
    my $reached = 0;
    for my $i (1 .. $#$cols) {
        my $b = $cols->[$i];
        last if $b > length($line);
        return 0 unless substr($line, $b - 2, 2) eq '  ' && substr($line, $b, 1) ne ' ';
        $reached++;
    }
    return $reached > 0 || length($line) <= $cols->[1];
}

my @in = <STDIN>;
chomp @in;
my @out;
for (my $i = 0; $i < @in; $i++) {
    my $line = $in[$i];
    if ($line =~ /^( *)STAGE +START +DURATION/) {
        # trace.WriteTable: fixed-width, right-aligned timings and a waterfall
        (my $h = $line) =~ s/\s+WATERFALL\s*$//;
        push @out, $h;
        my @rows;
        while ($i + 1 < @in && $in[$i + 1] =~ /\d\.\d\dms/) {
            my $r = $in[++$i];
            $r =~ s/( *\d+\.\d\dms)/sprintf("%*s", length($1), "x.xxms")/ge;
            $r =~ s/(ms)  [ █]*█/$1/;
            $r =~ s/\s+$//;
            push @rows, mask($r);
        }
        # CNI plugins of different networks run in parallel and start in
        # either order: sort each run of such sibling rows by name.
        for (my $j = 0; $j < @rows; $j++) {
            my $k = $j;
            $k++ while $k + 1 < @rows && $rows[$k + 1] =~ /^ +cni \S+ (ADD|DEL)\b/ && $rows[$j] =~ /^ +cni \S+ (ADD|DEL)\b/;
            @rows[$j .. $k] = sort @rows[$j .. $k] if $k > $j;
            $j = $k;
        }
        # rm removes the containers beside the sandbox's teardown (pause
        # stop, namespaces, CNI DEL, pause delete), so rows of the two branches
        # interleave by timing: put each stage (with its children) in the
        # order of the code instead.
        my @order = ('stop containers', 'remove containers', 'remove volumes', 'stop pause', 'pod ns remove',
                     'netns remove', 'cni teardown', 'delete pause', 'cgroup remove', 'state remove');
        my %rank = map { $order[$_] => $_ } 0 .. $#order;
        my @groups;
        for my $r (@rows) {
            if ($r =~ /^  / && @groups) { push @{$groups[-1]{rows}}, $r; next }
            my ($name) = $r =~ /^(\S+(?: \S+)*)/;
            push @groups, {name => $name // '', rows => [$r]};
        }
        if (grep { $_->{name} eq 'remove containers' } @groups) {
            my $n = 0;
            $_->{pos} = $rank{$_->{name}} // (@order + $n++) for @groups;
            @rows = map { @{$_->{rows}} } sort { $a->{pos} <=> $b->{pos} } @groups;
        }
        push @out, @rows;
        next;
    }
    my ($indent, @cols) = header_cols($line);
    if (@cols) {
        my @rows;
        while ($i + 1 < @in && is_row($in[$i + 1], $indent, \@cols)) {
            push @rows, $in[++$i];
        }
        if (@rows) {
            flush_table(\@out, $line, $indent, \@cols, \@rows);
            next;
        }
    }
    push @out, mask($line);
}
print "$_\n" for @out;
