import json
import sys

json.dumps({"modules": len(sys.modules), "bundle_on_path": "__BUNDLE__" in sys.path})
