"""`python -m loophound`, and the file `spark-submit` runs (it takes a file, not a module):

    spark-submit --master yarn "$(python -c 'import loophound.__main__ as m; print(m.__file__)')" \
        scan --store /shared/store --engine spark --only repeated_error

Run as a file its imports are absolute, so it needs loophound installed, not a checkout's
relative imports."""

from loophound.cli import run

if __name__ == "__main__":
    run()
