__all__ = []

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__

# %% ../nbs/74_all.ipynb #7bbba121
# `ddpsafe.io`: the names of `ddpsafe.formats.files`, where its code lives
from .formats.files import *
from .formats.files import __all__