"""Fail with one clear line unless the installed pyspark Python code matches its jars."""

import glob
import os
import sys

import pyspark

jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
jar_version = os.path.basename(jars[0]).rsplit("-", 1)[-1].removesuffix(".jar") if jars else None
if jar_version != pyspark.__version__:
    sys.exit(
        f"error: pyspark Python files are {pyspark.__version__} but its jars are {jar_version}; "
        "reinstall pyspark: pip install --no-deps --force-reinstall -c constraints.txt pyspark"
    )
print(f"pyspark {pyspark.__version__} (jars {jar_version}) ok")
