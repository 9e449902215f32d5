"""Print the commands of the first two ```bash blocks of a README, one per line."""

import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)[:2]
for block in blocks:
    print(" && ".join(line.strip() for line in block.strip().splitlines() if line.strip()))
