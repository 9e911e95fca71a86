#!/usr/bin/env python3
# Prints the RPM %changelog section for packaging/changelog (Debian format), newest first.
#   changelog-to-rpm.py CHANGELOG RELEASE
import re, sys
from email.utils import parsedate_to_datetime

path, release = sys.argv[1], sys.argv[2]
entries, cur = [], None
for line in open(path, encoding='utf-8'):
    line = line.rstrip('\n')
    m = re.match(r'^vmkeeper \(([^)]+)\)', line)
    if m:
        cur = {'version': m.group(1), 'items': []}
        entries.append(cur)
        continue
    m = re.match(r'^ -- (.+?)  (.+)$', line)
    if m and cur:
        cur['who'], cur['date'] = m.group(1), parsedate_to_datetime(m.group(2))
        continue
    m = re.match(r'^  \* (.*)$', line)
    if m and cur:
        cur['items'].append(m.group(1))
        continue
    m = re.match(r'^    (\S.*)$', line)
    if m and cur and cur['items']:
        cur['items'][-1] += ' ' + m.group(1)
print('%changelog')
for e in entries:
    print(f"* {e['date'].strftime('%a %b %d %Y')} {e['who']} - {e['version']}-{release}")
    for item in e['items']:
        print(f"- {item.replace('%', '%%')}")
    print()
